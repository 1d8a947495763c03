//! An experiment's tables: every point (CSV and markdown), and the seed's
//! figures beside ours (markdown), each seed figure with its source.

use super::point::Spread;

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

    /// An empty table of points: the columns that name a point (`keys`),
    /// then each figure given with its spread ([`Table::spread_columns`]),
    /// then the other figures.
    pub fn with_spreads(keys: &[&str], spreads: &[&str], figures: &[&str]) -> Table {
        let mut t = Table::new(keys);
        for name in spreads {
            t.columns.extend(Table::spread_columns(name));
        }
        t.columns.extend(figures.iter().map(|c| c.to_string()));
        t
    }

    /// Add a row; it must have a cell per column.
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// The columns of a figure given with its spread: `NAME`, `NAME_min`,
    /// `NAME_max`.
    pub fn spread_columns(name: &str) -> [String; 3] {
        [
            name.to_string(),
            format!("{name}_min"),
            format!("{name}_max"),
        ]
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
    /// The seed's figure, or the shape it describes.
    pub seed: String,
    /// Where in the seed: the file under `seeds/` and the table, figure or
    /// section ([`super::seed::Source`]).
    pub source: String,
    /// Ours, from this run.
    pub ours: String,
    /// How ours compares: the same shape or not, and the ratio where both
    /// are ratios.
    pub comparison: String,
}

impl SeedRow {
    /// A row.
    pub fn new(
        what: impl Into<String>,
        seed: impl Into<String>,
        source: impl Into<String>,
        ours: impl Into<String>,
        comparison: impl Into<String>,
    ) -> Self {
        SeedRow {
            what: what.into(),
            seed: seed.into(),
            source: source.into(),
            ours: ours.into(),
            comparison: comparison.into(),
        }
    }
}

/// The seed table's columns, in order.
pub const SEED_COLUMNS: [&str; 5] = [
    "figure",
    "the seed's",
    "source",
    "ours (this run)",
    "comparison",
];

/// The seed rows as a table.
pub fn seed_table(rows: &[SeedRow]) -> Table {
    let mut t = Table::new(&SEED_COLUMNS);
    for r in rows {
        t.push(vec![
            r.what.clone(),
            r.seed.clone(),
            r.source.clone(),
            r.ours.clone(),
            r.comparison.clone(),
        ]);
    }
    t
}

/// The seed rows as a markdown table.
pub fn seed_markdown(rows: &[SeedRow]) -> String {
    seed_table(rows).markdown()
}

/// A spread as one cell: `median (min–max)`.
pub fn spread_cell(s: &Spread, digits: usize) -> String {
    let [m, lo, hi] = s.cells(digits);
    format!("{m} ({lo}–{hi})")
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

    #[test]
    fn spread_columns_stand_between_the_keys_and_the_figures() {
        let t = Table::with_spreads(&["mode"], &["iops", "cpu"], &["rounds"]);
        assert_eq!(
            t.columns,
            ["mode", "iops", "iops_min", "iops_max", "cpu", "cpu_min", "cpu_max", "rounds"]
        );
        assert!(t.rows.is_empty());
    }
}
