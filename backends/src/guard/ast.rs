//! The AST half of the SQL guard: parse with the engine's sqlparser dialect and walk the tree with
//! allow-lists. Nothing is allowed by keyword: a statement is allowed because every node in it is
//! of a kind this file names (a read), every function is on the engine's list and every table is a
//! plain name of the trace's own schema.
//!
//! Runs on a thread with a large stack (see `super::check`): sqlparser builds left-deep trees for
//! long operator chains (`1+1+...+1`) whose traversal and drop recurse once per operator.

use std::fmt::{self, Write as _};
use std::ops::ControlFlow;

use sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, ObjectName, ObjectNamePart, Query, Select,
    SelectFlavor, SetExpr, Statement, TableFactor, UnaryOperator, Value, Visit, Visitor,
};
use sqlparser::dialect::{Dialect, DuckDbDialect, GenericDialect, SQLiteDialect};
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer};

use super::allow;
use super::rewrite;
use super::{Engine, Refusal, MAX_AMPLIFIER_CALLS, MAX_EXPR_DEPTH, MAX_SQL_BYTES};

/// Check one SQL text: `Ok` when it is a single read statement built only from allowed parts.
pub(crate) fn check(sql: &str, engine: Engine) -> Result<(), Refusal> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(Refusal::new(format!(
            "the query is {} bytes long; at most {MAX_SQL_BYTES} bytes are accepted",
            sql.len()
        )));
    }
    if sql.contains('\0') {
        return Err(Refusal::new("the query contains a NUL character".to_string()));
    }
    if sql.trim().is_empty() {
        return Err(Refusal::new("the query is empty".to_string()));
    }
    let dialect: &dyn Dialect = match engine {
        Engine::Sqlite => &SQLiteDialect {},
        Engine::DuckDb => &DuckDbDialect {},
    };
    let tokens = Tokenizer::new(dialect, sql)
        .tokenize_with_location()
        .map_err(|e| parse_refusal(engine, sql, &format!("could not read the query's tokens: {e}")))?;
    if engine == Engine::Sqlite {
        refuse_sqlite_match_operators(&tokens)?;
    }
    // sqlparser lacks some of the engines' own syntax (`x GLOB p`, `a IS b`, `INDEXED BY`, names such
    // as `top`, ...): `rewrite` maps it onto syntax it parses into the same kinds of nodes, for this
    // check only (the engine runs `sql` unchanged). What the SQLite dialect still cannot parse (`>>`,
    // `<<`, ...) is tried with the generic dialect before being refused. The AST walk below and the
    // engine's authorizer judge the result either way.
    let tokens = rewrite::rewrite(engine, tokens);
    let statements = match Parser::new(dialect).with_tokens_with_locations(tokens.clone()).parse_statements() {
        Ok(s) => s,
        Err(e) if engine == Engine::Sqlite => Parser::new(&GenericDialect {})
            .with_tokens_with_locations(tokens)
            .parse_statements()
            .map_err(|_| parse_refusal(engine, sql, &e.to_string()))?,
        Err(e) => return Err(parse_refusal(engine, sql, &e.to_string())),
    };
    let statement = match statements.as_slice() {
        [] => return Err(Refusal::new("the query has no statement (only comments or semicolons)".into())),
        [one] => one,
        many => {
            return Err(Refusal::new(format!(
                "the query has {} statements (stacked statements are refused); send one statement per call",
                many.len()
            )))
        }
    };
    let query_statement = match statement {
        Statement::Query(_) => statement,
        Statement::Explain { statement: inner, options, format, .. } => {
            if options.is_some() || format.is_some() {
                return Err(Refusal::new(
                    "EXPLAIN options and formats are refused; use plain EXPLAIN or EXPLAIN QUERY PLAN".into(),
                ));
            }
            match inner.as_ref() {
                Statement::Query(_) => inner.as_ref(),
                other => {
                    return Err(Refusal::new(format!("EXPLAIN of a non-query statement (`{}`)", snippet(other, 60))))
                }
            }
        }
        other => return Err(Refusal::new(format!("`{}` is not a read-only query", snippet(other, 60)))),
    };
    let mut checker = Checker { engine, depth: 0, amplifiers: 0 };
    match query_statement.visit(&mut checker) {
        ControlFlow::Break(refusal) => Err(refusal),
        ControlFlow::Continue(()) => Ok(()),
    }
}

/// sqlparser 0.59's SQLite dialect panics on a malformed right side of `MATCH` / `REGEXP` (it
/// unwraps). Both operators call functions that are not allowed anyway, so they are refused from the
/// tokens, before the parser sees them. (A panic would still only refuse: `check` runs the parser on
/// its own thread.)
fn refuse_sqlite_match_operators(tokens: &[TokenWithSpan]) -> Result<(), Refusal> {
    for t in tokens {
        if let Token::Word(w) = &t.token {
            if w.quote_style.is_none() && matches!(w.keyword, Keyword::MATCH | Keyword::REGEXP) {
                return Err(Refusal::new(format!(
                    "the {} operator (it calls a function this server does not allow); use LIKE, GLOB or glob(pattern, text)",
                    w.value.to_ascii_uppercase()
                )));
            }
        }
    }
    Ok(())
}

/// Walks every node; breaks with the first refusal.
struct Checker {
    engine: Engine,
    /// Current expression nesting, to refuse trees too deep to be useful.
    depth: usize,
    /// Calls so far of functions that build big values from small literals (see `allow::amplifies`).
    amplifiers: usize,
}

impl Visitor for Checker {
    type Break = Refusal;

    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<Refusal> {
        match statement {
            Statement::Query(_) => ControlFlow::Continue(()),
            other => refuse(format!("a nested `{}` statement", snippet(other, 60))),
        }
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Refusal> {
        if !query.locks.is_empty() {
            return refuse("FOR UPDATE / FOR SHARE locking clauses".into());
        }
        if query.for_clause.is_some() || query.format_clause.is_some() || query.settings.is_some() {
            return refuse("FOR / FORMAT / SETTINGS clauses".into());
        }
        if !query.pipe_operators.is_empty() {
            return refuse("pipe (|>) syntax".into());
        }
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                if cte.from.is_some() {
                    return refuse("a CTE with a FROM clause after its body".into());
                }
            }
        }
        self.check_set_expr(&query.body)
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<Refusal> {
        // SQLite has no column lists in table aliases (`t(a, b)`); sqlparser reads one where SQLite
        // sees an alias followed by a syntax error, e.g. `FROM x readfile('/etc/passwd')`.
        if let TableFactor::Table { alias: Some(alias), .. }
        | TableFactor::Derived { alias: Some(alias), .. }
        | TableFactor::NestedJoin { alias: Some(alias), .. } = factor
        {
            if self.engine == Engine::Sqlite && !alias.columns.is_empty() {
                return refuse(format!(
                    "the column list in the table alias `{}` (SQLite has none); name columns inside the subquery",
                    snippet(alias, 60)
                ));
            }
        }
        match factor {
            TableFactor::Table {
                name, args, with_hints, version, partitions, json_path, sample, index_hints, ..
            } => {
                if !with_hints.is_empty()
                    || version.is_some()
                    || !partitions.is_empty()
                    || json_path.is_some()
                    || sample.is_some()
                    || !index_hints.is_empty()
                {
                    return refuse(format!("table hints, versions, partitions or samples on `{name}`"));
                }
                match args {
                    Some(args) => {
                        if args.settings.is_some() {
                            return refuse("SETTINGS in a table function".into());
                        }
                        if args.args.len() > 1
                            && single_name(name).is_some_and(|n| n.to_ascii_lowercase().starts_with("pragma_"))
                        {
                            return refuse(format!(
                                "a second (schema) argument to {name}(); this trace has one schema: pass the table name only"
                            ));
                        }
                        self.check_table_function(name)
                    }
                    None => self.check_table_name(name),
                }
            }
            TableFactor::Derived { .. } | TableFactor::NestedJoin { .. } => ControlFlow::Continue(()),
            TableFactor::UNNEST { .. } if self.engine == Engine::DuckDb => ControlFlow::Continue(()),
            other => refuse(format!("the table expression `{}`", snippet(other, 60))),
        }
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Refusal> {
        self.depth += 1;
        if self.depth > MAX_EXPR_DEPTH {
            return refuse(format!("an expression nested more than {MAX_EXPR_DEPTH} levels deep"));
        }
        let duck = self.engine == Engine::DuckDb;
        match expr {
            Expr::Function(f) => self.check_function(f),
            Expr::BinaryOp { op, .. } if !binary_operator_allowed(self.engine, op) => refuse(format!(
                "the {op} operator (on {} it calls a function that is not on the allow-list); use LIKE, glob(p, x) or \
                 plain comparisons",
                self.engine.label()
            )),
            Expr::UnaryOp { op, .. }
                if !duck
                    && !matches!(
                        op,
                        UnaryOperator::Plus | UnaryOperator::Minus | UnaryOperator::Not | UnaryOperator::PGBitwiseNot
                    ) =>
            {
                refuse(format!("the unary operator {op}"))
            }
            Expr::Identifier(_)
            | Expr::CompoundIdentifier(_)
            | Expr::IsFalse(_)
            | Expr::IsNotFalse(_)
            | Expr::IsTrue(_)
            | Expr::IsNotTrue(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::IsUnknown(_)
            | Expr::IsNotUnknown(_)
            | Expr::IsDistinctFrom(..)
            | Expr::IsNotDistinctFrom(..)
            | Expr::InList { .. }
            | Expr::InSubquery { .. }
            | Expr::Between { .. }
            | Expr::BinaryOp { .. }
            | Expr::Like { .. }
            | Expr::ILike { .. }
            | Expr::UnaryOp { .. }
            | Expr::Cast { .. }
            | Expr::Collate { .. }
            | Expr::Nested(_)
            | Expr::Value(_)
            | Expr::TypedString(_)
            | Expr::Case { .. }
            | Expr::Exists { .. }
            | Expr::Subquery(_)
            | Expr::Tuple(_)
            | Expr::Wildcard(_)
            | Expr::QualifiedWildcard(..)
            | Expr::Extract { .. }
            | Expr::Ceil { .. }
            | Expr::Floor { .. }
            | Expr::Position { .. }
            | Expr::Substring { .. }
            | Expr::Trim { .. }
            | Expr::GroupingSets(_)
            | Expr::Cube(_)
            | Expr::Rollup(_) => ControlFlow::Continue(()),
            Expr::CompoundFieldAccess { .. }
            | Expr::AtTimeZone { .. }
            | Expr::Interval(_)
            | Expr::Array(_)
            | Expr::Struct { .. }
            | Expr::Named { .. }
            | Expr::Dictionary(_)
            | Expr::Map(_)
            | Expr::Lambda(_)
            | Expr::SimilarTo { .. }
            | Expr::RLike { .. }
            | Expr::AnyOp { .. }
            | Expr::AllOp { .. }
                if duck =>
            {
                ControlFlow::Continue(())
            }
            other => refuse(format!("the expression `{}`", snippet(other, 60))),
        }
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<Refusal> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_value(&mut self, value: &Value) -> ControlFlow<Refusal> {
        match value {
            Value::Placeholder(p) => {
                refuse(format!("the bind parameter `{p}` (nothing is bound to it); write the value into the query"))
            }
            _ => ControlFlow::Continue(()),
        }
    }
}

impl Checker {
    fn check_set_expr(&self, body: &SetExpr) -> ControlFlow<Refusal> {
        match body {
            SetExpr::Select(select) => self.check_select(select),
            SetExpr::Query(_) | SetExpr::Values(_) => ControlFlow::Continue(()),
            SetExpr::SetOperation { left, right, .. } => {
                self.check_set_expr(left)?;
                self.check_set_expr(right)
            }
            SetExpr::Insert(s) | SetExpr::Update(s) | SetExpr::Delete(s) | SetExpr::Merge(s) => refuse(format!(
                "a data-modifying statement inside the query (`{}`); CTEs and subqueries must be SELECTs",
                snippet(s, 60)
            )),
            SetExpr::Table(t) => refuse(format!("the `{}` shorthand; write SELECT * FROM ...", snippet(t, 40))),
        }
    }

    fn check_select(&self, s: &Select) -> ControlFlow<Refusal> {
        if let Some(into) = &s.into {
            return refuse(format!("`{}` (it creates a table)", snippet(into, 40)));
        }
        if s.top.is_some() {
            return refuse("TOP n; use LIMIT n".into());
        }
        if !s.lateral_views.is_empty() || s.prewhere.is_some() || s.connect_by.is_some() || s.value_table_mode.is_some()
        {
            return refuse("LATERAL VIEW / PREWHERE / CONNECT BY / SELECT AS VALUE".into());
        }
        if !s.cluster_by.is_empty() || !s.distribute_by.is_empty() || !s.sort_by.is_empty() {
            return refuse("CLUSTER BY / DISTRIBUTE BY / SORT BY; use ORDER BY".into());
        }
        if s.flavor != SelectFlavor::Standard && self.engine != Engine::DuckDb {
            return refuse("FROM-first SELECT; write SELECT ... FROM ...".into());
        }
        ControlFlow::Continue(())
    }

    fn check_function(&mut self, f: &sqlparser::ast::Function) -> ControlFlow<Refusal> {
        let name = match single_name(&f.name) {
            Some(n) => n,
            None => {
                return refuse(format!("the qualified function name `{}`; call functions by their plain name", f.name))
            }
        };
        if let Some(why) = allow::danger(self.engine, name) {
            return refuse(format!("the function {name}() ({why})"));
        }
        if allow::table_function_allowed(self.engine, name) && !allow::function_allowed(self.engine, name) {
            return refuse(format!(
                "{name}() as a scalar function; it is a table function: SELECT ... FROM {name}(...)"
            ));
        }
        if !allow::function_allowed(self.engine, name) {
            let hint = match self.engine {
                Engine::Sqlite => allow::sqlite_hint(name).map(|h| format!(" ({h})")).unwrap_or_default(),
                Engine::DuckDb => String::new(),
            };
            return ControlFlow::Break(Refusal::with_allowed(
                format!("the function {name}() is not on the allow-list{hint}"),
                format!("Allowed functions: {}.", allow::functions(self.engine).join(", ")),
            ));
        }
        if allow::amplifies(name) {
            self.amplifiers += 1;
            if self.amplifiers > MAX_AMPLIFIER_CALLS {
                return refuse(format!(
                    "more than {MAX_AMPLIFIER_CALLS} calls of printf/format/replace/hex/quote/json_pretty (each can build \
                     a megabyte value from a short literal, and constant ones are all held at once)"
                ));
            }
        }
        if f.uses_odbc_syntax || !matches!(f.parameters, FunctionArguments::None) {
            return refuse(format!("the call syntax of {name}()"));
        }
        match &f.args {
            FunctionArguments::None => ControlFlow::Continue(()),
            FunctionArguments::Subquery(_) => {
                refuse(format!("a bare subquery as the argument of {name}(); wrap it: {name}((SELECT ...))"))
            }
            FunctionArguments::List(list) => {
                for arg in &list.args {
                    let inner = match arg {
                        FunctionArg::Unnamed(a) => a,
                        FunctionArg::Named { arg, .. } | FunctionArg::ExprNamed { arg, .. } => {
                            if self.engine != Engine::DuckDb {
                                return refuse(format!("named arguments to {name}()"));
                            }
                            arg
                        }
                    };
                    if !matches!(inner, FunctionArgExpr::Expr(_)) && !name.eq_ignore_ascii_case("count") {
                        return refuse(format!("a wildcard argument to {name}() (only count(*) takes one)"));
                    }
                }
                ControlFlow::Continue(())
            }
        }
    }

    fn check_table_function(&self, name: &ObjectName) -> ControlFlow<Refusal> {
        let Some(n) = single_name(name) else {
            return refuse(format!("the qualified table function `{name}`"));
        };
        if let Some(why) = allow::danger(self.engine, n) {
            return refuse(format!("the table function {n}() ({why})"));
        }
        if allow::table_function_allowed(self.engine, n) {
            return ControlFlow::Continue(());
        }
        ControlFlow::Break(Refusal::with_allowed(
            format!("the table function {n}() is not on the allow-list"),
            format!(
                "Allowed table functions: {}; plain tables of this trace are allowed too.",
                allow::table_functions(self.engine).join(", ")
            ),
        ))
    }

    fn check_table_name(&self, name: &ObjectName) -> ControlFlow<Refusal> {
        let idents: Vec<&sqlparser::ast::Ident> = name
            .0
            .iter()
            .filter_map(|p| match p {
                ObjectNamePart::Identifier(i) => Some(i),
                ObjectNamePart::Function(_) => None,
            })
            .collect();
        if idents.len() != name.0.len() {
            return refuse(format!("the computed table name `{name}`"));
        }
        let table = match idents.as_slice() {
            [t] => t,
            [schema, t] if schema.value.eq_ignore_ascii_case("main") => t,
            _ => {
                return refuse(format!(
                    "the table `{name}`: only this trace's own tables can be read (plain names, or main.name)"
                ))
            }
        };
        if table.quote_style == Some('\'') || !is_plain_identifier(&table.value) {
            return refuse(format!(
                "the table name `{name}`: table names must be plain identifiers (letters, digits, _), not paths or strings"
            ));
        }
        let t = table.value.to_ascii_lowercase();
        if allow::danger(self.engine, &t).is_some() {
            return refuse(format!("the table `{t}` ({})", allow::danger(self.engine, &t).unwrap_or_default()));
        }
        let internal_ok = ["sqlite_master", "sqlite_schema", "sqlite_sequence", "sqlite_stat1", "sqlite_stat4"];
        let blocked = match self.engine {
            Engine::Sqlite => {
                (t.starts_with("sqlite_") && !internal_ok.contains(&t.as_str()))
                    || (t.starts_with("pragma_") && !allow::table_function_allowed(self.engine, &t))
            }
            Engine::DuckDb => t.starts_with("duckdb_") || t.starts_with("pragma_") || t.starts_with("sqlite_"),
        };
        if blocked {
            return refuse(format!(
                "the internal table `{t}`; read the trace's own tables (and sqlite_schema for the schema)"
            ));
        }
        ControlFlow::Continue(())
    }
}

/// Operators SQLite evaluates itself (MATCH and REGEXP call user functions, which are not allowed);
/// DuckDB's operators are built in, except custom ones.
fn binary_operator_allowed(engine: Engine, op: &BinaryOperator) -> bool {
    use BinaryOperator as B;
    match engine {
        Engine::Sqlite => matches!(
            op,
            B::Plus
                | B::Minus
                | B::Multiply
                | B::Divide
                | B::Modulo
                | B::StringConcat
                | B::Gt
                | B::Lt
                | B::GtEq
                | B::LtEq
                | B::Eq
                | B::NotEq
                | B::And
                | B::Or
                | B::BitwiseOr
                | B::BitwiseAnd
                | B::PGBitwiseShiftLeft
                | B::PGBitwiseShiftRight
                | B::Arrow
                | B::LongArrow
        ),
        Engine::DuckDb => !matches!(op, B::Custom(_)),
    }
}

fn refuse(what: String) -> ControlFlow<Refusal> {
    ControlFlow::Break(Refusal::new(what))
}

/// A one-part name, unquoted or double-quoted (never a string literal).
fn single_name(name: &ObjectName) -> Option<&str> {
    match name.0.as_slice() {
        [ObjectNamePart::Identifier(i)] if i.quote_style != Some('\'') => Some(i.value.as_str()),
        _ => None,
    }
}

fn is_plain_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// What sqlparser could not parse, with hints for the SQLite syntax it does not know.
fn parse_refusal(engine: Engine, sql: &str, err: &str) -> Refusal {
    let mut msg = format!("the query could not be parsed as {} SQL ({err})", engine.label());
    let first: String = sql
        .trim_start_matches(|c: char| c.is_whitespace() || c == ';' || c == '(')
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    if !first.is_empty() && !["SELECT", "WITH", "VALUES", "EXPLAIN", "FROM"].contains(&first.as_str()) {
        msg.push_str(&format!("; it starts with {first}, which is not a query"));
    }
    if engine == Engine::Sqlite
        && err.to_ascii_uppercase().contains("EXPECTED: (, FOUND:")
        && sql.to_ascii_uppercase().contains(" IN ")
    {
        msg.push_str("; write `x IN table` as `x IN (SELECT column FROM table)`");
    }
    Refusal::new(msg)
}

/// At most `max` characters of a node's SQL text, for messages (the rest as `…`).
fn snippet(node: &dyn fmt::Display, max: usize) -> String {
    struct Capped {
        out: String,
        left: usize,
    }
    impl fmt::Write for Capped {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            for c in s.chars() {
                if self.left == 0 {
                    return Err(fmt::Error);
                }
                self.out.push(if c.is_control() { ' ' } else { c });
                self.left -= 1;
            }
            Ok(())
        }
    }
    let mut capped = Capped { out: String::new(), left: max };
    if write!(capped, "{node}").is_err() {
        capped.out.push('…');
    }
    capped.out
}
