//! Plain aligned text tables for terminal output (numbers right-aligned, text left-aligned).

pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    /// Columns whose header starts with '>' are right-aligned (the '>' is not printed).
    pub fn new(headers: &[&str]) -> Table {
        Table {
            right: headers.iter().map(|h| h.starts_with('>')).collect(),
            headers: headers.iter().map(|h| h.trim_start_matches('>').to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                let pad = width[i].saturating_sub(c.chars().count());
                if i > 0 {
                    s.push_str("  ");
                }
                if self.right[i] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    if i + 1 < n {
                        s.push_str(&" ".repeat(pad));
                    }
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        out.push_str(&line(&width.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>()));
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }
}

/// Microseconds with 3 decimals, trailing zeros trimmed for readability.
pub fn us(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}
