//! Token rewrites that let sqlparser read SQLite (and DuckDB) syntax it does not know, for the AST
//! check only: the engine always runs the caller's text unchanged.
//!
//! Each rewrite maps the engine's own syntax onto syntax sqlparser parses into the same kinds of
//! nodes, and never removes a token that could name a table, call a function or hold an
//! expression. What is dropped is keywords only, or (`INDEXED BY name`) one index name, which makes
//! SQLite pick an index of the table it names and can do nothing else. So the walk in `ast.rs` still
//! sees every table, function and expression the engine will see, and judges them with the same
//! allow-lists; the engine's own layer (authorizer, read-only connection) judges the original text.
//!
//! - `x [NOT] GLOB p` (SQLite, DuckDB): read as `x [NOT] LIKE p`. Same operands, same precedence in
//!   SQLite's grammar (both are its `likeop`); SQLite's GLOB calls `glob(p, x)`, which is allowed,
//!   and DuckDB's GLOB operator matches strings only (its file-listing `glob` is a table function,
//!   always followed by `(`, which is never rewritten).
//! - `a IS b` / `a IS NOT b` with `b` not NULL, TRUE, FALSE or DISTINCT (SQLite): read as
//!   `a IS NOT DISTINCT FROM b` / `a IS DISTINCT FROM b`, which is what SQLite means by them.
//! - `x ISNULL` (SQLite): read as `x IS NULL`.
//! - `~x` (SQLite): read as `-x` (both are prefix operators of the same precedence).
//! - `INDEXED BY name` / `NOT INDEXED` after a table (SQLite): dropped. The table itself stays and
//!   is checked as before.
//! - `EXCLUDE {NO OTHERS | CURRENT ROW | GROUP | TIES}` closing a window frame (SQLite, DuckDB):
//!   dropped (keywords only).
//! - `AS [NOT] MATERIALIZED (` in a CTE (SQLite, DuckDB): the hint is dropped (keywords only); the
//!   CTE body is checked as before.
//! - Words SQLite does not reserve but sqlparser treats as clauses or operators (`top`, `sample`,
//!   `format`, `qualify`, `interval`, `div`, ...; on DuckDB only `top`, which DuckDB does not
//!   reserve either): read as quoted identifiers, as the engine reads them, unless a `(` follows
//!   (a function call keeps its name token as it is).

use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::Engine;

/// Words that sqlparser reserves (for aliases, identifiers or infix operators) or parses as a
/// clause (`TOP`), and that SQLite does not have among its keywords: to SQLite they are names.
const SQLITE_NAMES: &[Keyword] = &[
    Keyword::ANTI,
    Keyword::ASOF,
    Keyword::CLUSTER,
    Keyword::CONNECT,
    Keyword::DISTRIBUTE,
    Keyword::DIV,
    Keyword::FETCH,
    Keyword::FORMAT,
    Keyword::GLOBAL,
    Keyword::ILIKE,
    Keyword::INTERVAL,
    Keyword::LATERAL,
    Keyword::MATCH_CONDITION,
    Keyword::MATCH_RECOGNIZE,
    Keyword::MEMBER,
    Keyword::MINUS,
    Keyword::OPEN,
    Keyword::OVERLAPS,
    Keyword::PIVOT,
    Keyword::PREWHERE,
    Keyword::QUALIFY,
    Keyword::RLIKE,
    Keyword::SAMPLE,
    Keyword::SEMI,
    Keyword::SETTINGS,
    Keyword::SIMILAR,
    Keyword::SORT,
    Keyword::START,
    Keyword::STRUCT,
    Keyword::TABLESAMPLE,
    Keyword::TOP,
    Keyword::UNPIVOT,
    Keyword::XOR,
];

/// The same for DuckDB: only `TOP` (DuckDB reserves most of the others itself).
const DUCKDB_NAMES: &[Keyword] = &[Keyword::TOP];

/// The tokens sqlparser should parse instead of `tokens` (the engine's own text, tokenized).
pub(crate) fn rewrite(engine: Engine, tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let sqlite = engine == Engine::Sqlite;
    // Positions of the tokens the parser reads (it skips whitespace and comments).
    let sig: Vec<usize> =
        tokens.iter().enumerate().filter(|(_, t)| !matches!(t.token, Token::Whitespace(_))).map(|(i, _)| i).collect();
    let tok = |k: usize| sig.get(k).map(|&i| &tokens[i].token);
    let word = |k: usize, w: &str| matches!(tok(k), Some(Token::Word(x)) if x.quote_style.is_none() && x.value.eq_ignore_ascii_case(w));
    let is = |k: usize, t: &Token| tok(k) == Some(t);
    // What replaces each token (indexed like `tokens`): `None` keeps it, `Some(vec![])` drops it.
    let mut edits: Vec<Option<Vec<Token>>> = vec![None; tokens.len()];
    let kw = |w: &str| Token::make_keyword(w);

    for k in 0..sig.len() {
        let i = sig[k];
        if edits[i].is_some() {
            continue;
        }
        let prev_is_period = k > 0 && is(k - 1, &Token::Period);
        let next_is_paren = is(k + 1, &Token::LParen);
        match &tokens[i].token {
            Token::Tilde if sqlite => edits[i] = Some(vec![Token::Minus]),
            Token::Word(w) if w.quote_style.is_none() => {
                let v = w.value.to_ascii_uppercase();
                if v == "GLOB" && k > 0 && !prev_is_period && !next_is_paren {
                    edits[i] = Some(vec![kw("LIKE")]);
                } else if v == "IS" && sqlite {
                    let plain_next = |k: usize| ["NULL", "TRUE", "FALSE", "DISTINCT"].iter().any(|w| word(k, w));
                    if word(k + 1, "NOT") {
                        if tok(k + 2).is_some() && !plain_next(k + 2) {
                            edits[sig[k + 1]] = Some(vec![kw("DISTINCT"), kw("FROM")]);
                        }
                    } else if tok(k + 1).is_some() && !is(k + 1, &Token::EOF) && !plain_next(k + 1) {
                        edits[i] = Some(vec![kw("IS"), kw("NOT"), kw("DISTINCT"), kw("FROM")]);
                    }
                } else if v == "ISNULL" && sqlite && k > 0 && !prev_is_period && !next_is_paren {
                    edits[i] = Some(vec![kw("IS"), kw("NULL")]);
                } else if v == "NOT" && sqlite && word(k + 1, "INDEXED") {
                    edits[i] = Some(vec![]);
                    edits[sig[k + 1]] = Some(vec![]);
                } else if v == "INDEXED"
                    && sqlite
                    && word(k + 1, "BY")
                    && matches!(tok(k + 2), Some(Token::Word(_)))
                    && !is(k + 3, &Token::Period)
                    && !is(k + 3, &Token::LParen)
                {
                    for j in k..k + 3 {
                        edits[sig[j]] = Some(vec![]);
                    }
                } else if v == "EXCLUDE" {
                    let len = if (word(k + 1, "NO") && word(k + 2, "OTHERS"))
                        || (word(k + 1, "CURRENT") && word(k + 2, "ROW"))
                    {
                        3
                    } else if word(k + 1, "GROUP") || word(k + 1, "TIES") {
                        2
                    } else {
                        0
                    };
                    if len > 0 && is(k + len, &Token::RParen) {
                        for j in k..k + len {
                            edits[sig[j]] = Some(vec![]);
                        }
                    }
                } else if v == "MATERIALIZED" && next_is_paren && k > 0 {
                    if word(k - 1, "AS") {
                        edits[i] = Some(vec![]);
                    } else if k > 1 && word(k - 1, "NOT") && word(k - 2, "AS") {
                        edits[i] = Some(vec![]);
                        edits[sig[k - 1]] = Some(vec![]);
                    }
                } else if !next_is_paren && (if sqlite { SQLITE_NAMES } else { DUCKDB_NAMES }).contains(&w.keyword) {
                    edits[i] = Some(vec![Token::make_word(&w.value, Some('"'))]);
                }
            }
            _ => {}
        }
    }

    let mut out = Vec::with_capacity(tokens.len());
    for (t, edit) in tokens.into_iter().zip(edits) {
        match edit {
            None => out.push(t),
            Some(new) => out.extend(new.into_iter().map(|token| TokenWithSpan { token, span: t.span })),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{ast, Engine};

    fn ok(engine: Engine, sql: &str) {
        if let Err(r) = ast::check(sql, engine) {
            panic!("{engine:?} refused {sql:?}: {r}");
        }
    }

    fn refused(engine: Engine, sql: &str) {
        assert!(ast::check(sql, engine).is_err(), "{engine:?} let through {sql:?}");
    }

    #[test]
    fn sqlite_syntax_sqlparser_lacks_is_read() {
        for sql in [
            "SELECT name FROM t WHERE name GLOB 'py*' AND name NOT GLOB '*x'",
            "SELECT a IS b, a IS NOT b, a IS NULL, a IS NOT NULL, a IS TRUE, a IS NOT DISTINCT FROM b FROM t",
            "SELECT count(*) FROM t JOIN u ON t.a IS u.a WHERE t.b IS NOT u.b",
            "SELECT a ISNULL, a NOTNULL, ~a, -~a FROM t",
            "SELECT * FROM t INDEXED BY idx_t_a WHERE a > 0",
            "SELECT * FROM t AS x NOT INDEXED JOIN u INDEXED BY \"idx u\" ON u.a = x.a",
            "WITH top AS (SELECT 1 AS x) SELECT top.x FROM top",
            "SELECT top.a, sample.b FROM t top JOIN u sample ON sample.a = top.a",
            "SELECT a top, b format, c qualify FROM t",
            "WITH c AS MATERIALIZED (SELECT 1 AS x), d AS NOT MATERIALIZED (SELECT 2 AS y) SELECT * FROM c, d",
            "SELECT sum(a) OVER (ORDER BY b ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING EXCLUDE CURRENT ROW) FROM t",
            "SELECT sum(a) OVER (ORDER BY b GROUPS 1 PRECEDING EXCLUDE TIES), sum(a) OVER (ORDER BY b RANGE CURRENT ROW EXCLUDE GROUP) FROM t",
            "SELECT sum(a) OVER (ORDER BY b ROWS UNBOUNDED PRECEDING EXCLUDE NO OTHERS) FROM t",
            "SELECT a << 2, a >> 1, ~a FROM t WHERE a GLOB '1*'",
            "SELECT glob('a*', name), trim(name), format('%d', 1) FROM t",
        ] {
            ok(Engine::Sqlite, sql);
        }
    }

    #[test]
    fn the_rewrites_hide_nothing() {
        for sql in [
            "SELECT 1 WHERE readfile('/etc/passwd') GLOB '*'",
            "SELECT 1 WHERE 'x' NOT GLOB load_extension('/tmp/x.so')",
            "SELECT * FROM glob('/*')",
            "SELECT * FROM glob ('/*')",
            "SELECT 1 IS readfile('/etc/passwd')",
            "SELECT 1 IS NOT (SELECT count(*) FROM sqlite_temp_master)",
            "SELECT readfile('/etc/passwd') ISNULL",
            "SELECT ~load_extension('/tmp/x.so')",
            "SELECT * FROM dbstat INDEXED BY x",
            "SELECT * FROM sqlite_dbpage NOT INDEXED",
            "SELECT * FROM t INDEXED BY readfile('/etc/passwd')",
            "SELECT * FROM t INDEXED BY temp.x",
            "SELECT * FROM t INDEXED BY 'x'",
            "DELETE FROM t INDEXED BY x WHERE a = 1",
            "WITH top AS (DELETE FROM t RETURNING *) SELECT * FROM top",
            "WITH x AS MATERIALIZED (DELETE FROM t RETURNING *) SELECT 1",
            "SELECT top.* FROM sqlite_temp_master top",
            "SELECT TOP 5 * FROM t",
            "SELECT 1 FORMAT JSON",
            "SELECT sum(a) OVER (ORDER BY b ROWS CURRENT ROW EXCLUDE CURRENT ROW) FROM dbstat",
            "SELECT 1 EXCLUDE CURRENT ROW",
            "SELECT * FROM t WHERE a IN pragma_database_list",
        ] {
            refused(Engine::Sqlite, sql);
        }
        for sql in ["SELECT * FROM glob('/*')", "SELECT * FROM glob ('/*')", "SELECT * FROM \"glob\"('/*')"] {
            refused(Engine::DuckDb, sql);
        }
    }

    #[test]
    fn duckdb_reads_what_duckdb_has() {
        for sql in [
            "SELECT name FROM t WHERE name GLOB 'py*' AND name NOT GLOB '*x'",
            "WITH top AS (SELECT 1 AS x) SELECT top.x FROM top",
            "WITH c AS MATERIALIZED (SELECT 1 AS x) SELECT * FROM c",
            "SELECT sum(a) OVER (ORDER BY b ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING EXCLUDE CURRENT ROW) FROM t",
        ] {
            ok(Engine::DuckDb, sql);
        }
        // SQLite-only syntax stays unparsed on DuckDB (refused, never misread).
        for sql in [
            "SELECT * FROM t INDEXED BY i",
            "SELECT a IS b FROM t",
            "SELECT a FROM t WHERE a ISNULL",
            "SELECT ~a FROM t",
        ] {
            refused(Engine::DuckDb, sql);
        }
    }
}
