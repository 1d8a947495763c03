//! An experiment's tables: every point (CSV and markdown), and the seed's
//! figures beside ours (markdown).

/// Said where a seed's figure is not recorded in this repository.
pub const NOT_RECORDED: &str = "not recorded in this repository";

/// Rows of cells under named columns (names carry their units).
#[derive(Clone, Debug, Default)]
pub struct Table {
    /// Column names: `iops`, `clat_p99_ns`.
    pub columns: Vec<String>,
    /// One row per point, one cell per column.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[&str]) -> Table {
        Table {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Add a row; it must have a cell per column.
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// As CSV (RFC 4180: a cell with a comma or quote is quoted).
    pub fn csv(&self) -> String {
        let line = |cells: &[String]| {
            cells
                .iter()
                .map(|c| {
                    if c.contains([',', '"', '\n']) {
                        format!("\"{}\"", c.replace('"', "\"\""))
                    } else {
                        c.clone()
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
                + "\n"
        };
        let mut s = line(&self.columns);
        for r in &self.rows {
            s.push_str(&line(r));
        }
        s
    }

    /// As a markdown table.
    pub fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | ").replace('\n', " "));
        let mut s = line(&self.columns);
        s.push_str(&line(
            &self
                .columns
                .iter()
                .map(|_| "---".to_string())
                .collect::<Vec<_>>(),
        ));
        for r in &self.rows {
            s.push_str(&line(r));
        }
        s
    }
}

/// One figure of the seed beside ours.
#[derive(Clone, Debug)]
pub struct SeedRow {
    /// What is measured, with its unit.
    pub what: String,
    /// The seed's figure and where it comes from, or [`NOT_RECORDED`].
    pub seed: String,
    /// Ours, from this run.
    pub ours: String,
}

impl SeedRow {
    /// A row.
    pub fn new(what: impl Into<String>, seed: impl Into<String>, ours: impl Into<String>) -> Self {
        SeedRow {
            what: what.into(),
            seed: seed.into(),
            ours: ours.into(),
        }
    }
}

/// The seed rows as a markdown table.
pub fn seed_markdown(rows: &[SeedRow]) -> String {
    let mut t = Table::new(&["figure", "the seed's", "ours (this run)"]);
    for r in rows {
        t.push(vec![r.what.clone(), r.seed.clone(), r.ours.clone()]);
    }
    t.markdown()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_it() {
        let mut t = Table::new(&["a", "b"]);
        t.push(vec!["1".into(), "x,y".into()]);
        assert_eq!(t.csv(), "a,b\n1,\"x,y\"\n");
        assert!(t
            .markdown()
            .starts_with("| a | b |\n| --- | --- |\n| 1 | x,y |"));
    }
}
